"""The Redis contract of cache-aware routing, shared by engines and the API's router.

Each engine publishes the block hashes of its prefix cache (a Redis set, Keys.prefix_index)
and reads, beside the model's shared request stream, a direct stream of its own
(Keys.direct_requests) into which the API puts requests whose prefix it holds. Both streams
are read through the same consumer group, so claims, acknowledgements and the started hash
work as for the shared stream; an entry id from the direct stream is tagged (``direct_entry``)
wherever the service keeps entry ids, so each is acknowledged on its own stream.

Crash safety: the API adds to a direct stream only while the engine's status key exists
(ROUTE_SCRIPT, atomic in Redis), and whoever takes over from a dead or departing engine moves
every entry left in its direct stream to the shared stream (MOVE_SCRIPT, atomic as well). So
no routed request can be stranded in the stream of an engine that is gone.

Torch-free: API processes import it.
"""

from __future__ import annotations

from collections.abc import Iterable

# Block hashes are sha256 digests; the index keeps their first 16 bytes (a collision would
# only misroute a request, never share a block: the engine checks its full hashes).
PREFIX_INDEX_BYTES = 16

_DIRECT_TAG = "direct/"


def index_member(block_hash: bytes) -> bytes:
    return block_hash[:PREFIX_INDEX_BYTES]


def direct_entry(entry_id: str) -> str:
    """How the service names an entry of its direct stream (the started hash, acks)."""
    return _DIRECT_TAG + entry_id


def is_direct_entry(entry_id: str) -> bool:
    """Whether ``entry_id`` (as the service keeps it) is of the engine's direct stream."""
    return entry_id.startswith(_DIRECT_TAG)


def split_entries(entry_ids: Iterable[str | bytes]) -> tuple[list[str], list[str]]:
    """(shared stream ids, direct stream ids untagged) of a mixed list of entry ids."""
    shared, direct = [], []
    for raw in entry_ids:
        entry_id = raw.decode() if isinstance(raw, bytes) else raw
        if is_direct_entry(entry_id):
            direct.append(entry_id[len(_DIRECT_TAG) :])
        else:
            shared.append(entry_id)
    return shared, direct


# Adds a request to an engine's direct stream only while the engine's status key exists, else
# to the shared stream; 1 when it went to the engine. Both routing scripts end with it.
_ADD_WHILE_LIVE = """
local function add_while_live(status, direct, shared, field, payload)
  if redis.call('EXISTS', status) == 1 then
    redis.call('XADD', direct, '*', field, payload)
    return 1
  end
  redis.call('XADD', shared, '*', field, payload)
  return 0
end
"""

# A route decided beforehand. KEYS: the engine's status key, its direct stream, the shared
# stream; ARGV: field, message. Returns 1 when the entry went to the direct stream, 0 when the
# engine was gone (shared).
ROUTE_SCRIPT = (
    _ADD_WHILE_LIVE
    + """
return add_while_live(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
"""
)

# Outcomes of CHOOSE_AND_ROUTE_SCRIPT (its reply's third element).
ROUTED, NO_HOLDER, BACKLOGGED, NOT_CLEARLY_BETTER, HOLDER_GONE, PLACED = 1, 2, 3, 4, 5, 6

# The router's rule and the add in one round trip (inference/transport/prefix_router.py says
# the rule). KEYS: the shared stream, then for each candidate engine its prefix index, its
# status key and its direct stream. ARGV: field, message ("" only decides: nothing is added),
# prompt tokens, the shared stream's cost, the gain required, where a prompt nobody holds is
# placed (a candidate, 1-based; 0: the shared stream); then for each candidate its block
# size, load, room (requests it may still queue before it is backlogged), which hash list is
# its (1-based) and the blocks the router knows it was sent lately (its own memory, ahead of
# the index); then the hash lists, each the prompt's index members concatenated
# (PREFIX_INDEX_BYTES each). A candidate's cached prefix is its index's leading run of the
# list: a chained hash names its whole prefix, so the first miss ends it.
# Reply: {candidate (1-based; 0 when none holds a block and none is placed), its cached
# tokens, outcome}.
CHOOSE_AND_ROUTE_SCRIPT = (
    _ADD_WHILE_LIVE
    + f"""
local member = {PREFIX_INDEX_BYTES}
local n = (#KEYS - 1) / 3
local prompt, shared_cost, gain = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local place = tonumber(ARGV[6])
local best, best_cost, best_cached = 0, 0, 0
for c = 1, n do
  local at = 6 + (c - 1) * 5
  local hashes = ARGV[6 + n * 5 + tonumber(ARGV[at + 4])]
  local blocks = 0
  for b = 0, #hashes / member - 1 do
    local hash = string.sub(hashes, b * member + 1, (b + 1) * member)
    if redis.call('SISMEMBER', KEYS[1 + (c - 1) * 3 + 1], hash) == 0 then break end
    blocks = b + 1
  end
  blocks = math.max(blocks, tonumber(ARGV[at + 5]))
  if blocks > 0 then
    local cached = blocks * tonumber(ARGV[at + 1])
    local cost = (prompt - cached) * tonumber(ARGV[at + 2])
    if best == 0 or cost < best_cost then best, best_cost, best_cached = c, cost, cached end
  end
end
local outcome = {ROUTED}
if best == 0 then
  outcome = {NO_HOLDER}
elseif tonumber(ARGV[6 + (best - 1) * 5 + 3]) <= 0 then
  outcome = {BACKLOGGED}
elseif best_cost > gain * shared_cost then
  outcome = {NOT_CLEARLY_BETTER}
end
local target = 0
if outcome == {ROUTED} then
  target = best
elseif outcome == {NO_HOLDER} and place > 0 then
  target, best, outcome = place, place, {PLACED}
end
if ARGV[2] ~= '' then
  if target > 0 then
    local k = 1 + (target - 1) * 3
    if add_while_live(KEYS[k + 2], KEYS[k + 3], KEYS[1], ARGV[1], ARGV[2]) == 0 then
      outcome = {HOLDER_GONE}
    end
  else
    redis.call('XADD', KEYS[1], '*', ARGV[1], ARGV[2])
  end
end
return {{best, best_cached, outcome}}
"""
)

# KEYS: a direct stream, the shared stream; ARGV: "all" or "undelivered", the group's name,
# the lost-engines field's name (protocol.LOST_FIELD). Appends entries of the direct stream to
# the shared stream, in order, and deletes them there; returns how many moved. "all" (a dead
# engine's stream: what it had started was failed and deleted first) moves every entry and
# deletes the stream, its group with it; an entry the dead engine had read goes with its
# lost-engines count raised by its deliveries, since the new entry starts undelivered.
# "undelivered" (a draining engine's own) moves only those no read has delivered yet, leaving
# the ones it runs.
MOVE_SCRIPT = """
local after = '-'
local delivered = {}
if ARGV[1] == 'undelivered' then
  if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
  for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local fields = {}
    for i = 1, #group, 2 do fields[group[i]] = group[i + 1] end
    if fields['name'] == ARGV[2] then after = '(' .. fields['last-delivered-id'] end
  end
else
  local ok, pending = pcall(redis.call, 'XPENDING', KEYS[1], ARGV[2], '-', '+', 1000000)
  if ok then
    for _, p in ipairs(pending) do delivered[p[1]] = p[4] end
  end
end
local entries = redis.call('XRANGE', KEYS[1], after, '+')
for _, entry in ipairs(entries) do
  local fields, lost, old = {}, delivered[entry[1]] or 0, entry[2]
  for i = 1, #old, 2 do
    if old[i] == ARGV[3] then
      lost = lost + tonumber(old[i + 1])
    else
      table.insert(fields, old[i])
      table.insert(fields, old[i + 1])
    end
  end
  if lost > 0 then
    table.insert(fields, ARGV[3])
    table.insert(fields, lost)
  end
  redis.call('XADD', KEYS[2], '*', unpack(fields))
  redis.call('XDEL', KEYS[1], entry[1])
end
if ARGV[1] == 'all' then redis.call('DEL', KEYS[1]) end
return #entries
"""
