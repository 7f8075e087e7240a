"""The Redis contract: messages round-trip, bad bytes are refused, no torch on import."""

import subprocess
import sys

import msgspec
import pytest

from engine import protocol


def test_import_protocol_does_not_load_torch():
    code = "import sys, engine.protocol; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_generate_request_round_trips():
    request = protocol.GenerateRequest(
        request_id="r1",
        frontend_id="f1",
        prompt_token_ids=[1, 2, 3],
        sampling=protocol.SamplingOptions(temperature=0.0, max_tokens=5, stop_token_ids=[7]),
        adapter=protocol.AdapterRef(name="a", checksum="c"),
        cache_salt="salt",
        tenant="t",
        arrival_time=12.5,
        priority=2,
    )
    assert protocol.decode_request(protocol.encode(request)) == request


def test_sampling_defaults_follow_vllm():
    options = protocol.SamplingOptions()
    assert (options.n, options.temperature, options.top_p, options.max_tokens) == (1, 1.0, 1.0, 16)
    assert options.top_k == -1 and options.min_p == 0.0 and options.repetition_penalty == 1.0


def test_control_messages_are_a_tagged_union():
    messages = [
        protocol.AbortRequest(request_id="x"),
        protocol.LoadAdapter(adapter=protocol.AdapterRef(name="a", path="/p", checksum="c")),
        protocol.UnloadAdapter(name="a"),
        protocol.Drain(engine_id="e"),
    ]
    for message in messages:
        assert protocol.decode_control(protocol.encode(message)) == message


def test_output_batch_round_trips_with_logprobs():
    batch = protocol.OutputBatch(
        engine_id="e",
        step=3,
        deltas=[
            protocol.RequestDelta(
                request_id="r",
                new_token_ids=[5],
                logprobs=[protocol.TokenLogprob(5, -0.1, [5, 6], [-0.1, -2.0])],
                finish_reason="stop",
                stop_reason=9,
            ),
            protocol.RequestDelta(request_id="s", error="boom", finish_reason="abort"),
        ],
    )
    assert protocol.decode_outputs(protocol.encode(batch)) == batch


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1\xff not msgpack",
        msgspec.msgpack.encode({"type": "unknown", "request_id": "r"}),
        msgspec.msgpack.encode({"type": "generate", "request_id": "r"}),  # fields missing
        msgspec.msgpack.encode(
            {
                "type": "generate",
                "request_id": "r",
                "frontend_id": "f",
                "prompt_token_ids": "not a list",
            }
        ),
    ],
)
def test_malformed_requests_raise_msgspec_errors(data):
    with pytest.raises((msgspec.DecodeError, msgspec.ValidationError)):
        protocol.decode_request(data)


def test_status_is_json_with_dashboard_fields():
    status = protocol.EngineStatus(engine_id="e", model="m", num_running=2, draining=True)
    raw = protocol.encode_status(status)
    fields = msgspec.json.decode(raw)
    for name in [
        "engine_id",
        "model",
        "adapters",
        "kv_cache_usage",
        "num_running",
        "num_waiting",
        "num_free_blocks",
        "num_total_blocks",
        "tokens_per_s",
        "prompt_tokens_total",
        "generation_tokens_total",
        "prefix_cache_queries",
        "prefix_cache_hits",
        "num_preemptions",
        "started_at",
        "updated_at",
        "draining",
    ]:
        assert name in fields
    assert protocol.decode_status(raw) == status


def test_keys_use_prefix_from_environment(monkeypatch):
    monkeypatch.setenv("PLATFORM_REDIS_PREFIX", "dep2")
    keys = protocol.Keys()
    assert keys.requests("m") == "dep2:requests:m"
    assert keys.status("m", "e1") == "dep2:status:m:e1"
    assert keys.outputs("f") == "dep2:outputs:f"
    assert keys.control("m") == "dep2:control:m"
    assert protocol.Keys("x").engines() == "x:engines"


def test_engine_ids_split_back_from_members():
    engine_id = protocol.new_engine_id()
    assert ":" not in engine_id
    assert protocol.split_engine_member(protocol.engine_member("org:model", engine_id)) == (
        "org:model",
        engine_id,
    )
