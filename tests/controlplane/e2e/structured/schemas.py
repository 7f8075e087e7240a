"""Twenty response models for ``client.chat.completions.parse``: nested objects, arrays,
enums, optional fields, numbers with bounds. Strings and arrays are bounded, so that even
random weights finish inside max_tokens (the grammar forces the shape, not the length)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, Field

Short = Field(max_length=16)
Word = Annotated[str, Field(max_length=10)]
Digit = Annotated[int, Field(ge=0, le=9)]


class Color(StrEnum):
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


class Genre(StrEnum):
    FICTION = "fiction"
    HISTORY = "history"
    SCIENCE = "science"


class Point(BaseModel):
    x: int = Field(ge=-100, le=100)
    y: int = Field(ge=-100, le=100)


class Person(BaseModel):
    name: str = Short
    age: int = Field(ge=0, le=120)


class Flag(BaseModel):
    enabled: bool


class Rating(BaseModel):
    stars: int = Field(ge=1, le=5)
    comment: str = Field(max_length=30)


class Paint(BaseModel):
    color: Color


class Tags(BaseModel):
    tags: list[Word] = Field(max_length=3)


class Scores(BaseModel):
    scores: list[Annotated[int, Field(ge=0, le=100)]] = Field(min_length=1, max_length=4)


class Temperature(BaseModel):
    celsius: float = Field(ge=-50, le=50)


class Address(BaseModel):
    street: str = Short
    city: str = Short


class Customer(BaseModel):
    name: str = Short
    address: Address


class Item(BaseModel):
    sku: str = Field(max_length=8)
    quantity: int = Field(ge=1, le=9)


class Order(BaseModel):
    order_id: int = Field(ge=1, le=9999)
    items: list[Item] = Field(min_length=1, max_length=3)


class Weather(BaseModel):
    city: str = Short
    condition: Literal["sunny", "rainy", "cloudy"]
    temperature: int = Field(ge=-30, le=45)


class Book(BaseModel):
    title: str = Field(max_length=25)
    year: int = Field(ge=1800, le=2030)
    genres: list[Genre] = Field(max_length=2)


class Grid(BaseModel):
    rows: list[Annotated[list[Digit], Field(max_length=3)]] = Field(max_length=3)


class Probability(BaseModel):
    p: float = Field(ge=0, le=1)


class Meeting(BaseModel):
    title: str = Short
    day: Literal["mon", "tue", "wed", "thu", "fri"]
    all_day: bool


class Team(BaseModel):
    lead: Person
    members: list[Person] = Field(max_length=2)


class Answer(BaseModel):
    answer: Literal["yes", "no", "maybe"]
    confidence: float = Field(ge=0, le=1)


class Count(BaseModel):
    item: Color
    n: int = Field(ge=0, le=100)


class Inventory(BaseModel):
    counts: list[Count] = Field(max_length=3)


class Settings(BaseModel):
    name: str = Field(max_length=10)
    retries: int = Field(ge=0, le=5)
    timeout: float = Field(ge=0.5, le=30)
    verbose: bool
    level: Literal["debug", "info"] | None


RESPONSE_MODELS: list[type[BaseModel]] = [
    Point, Person, Flag, Rating, Paint, Tags, Scores, Temperature, Address, Customer,
    Order, Weather, Book, Grid, Probability, Meeting, Team, Answer, Inventory, Settings,
]  # fmt: skip
assert len(RESPONSE_MODELS) == 20
