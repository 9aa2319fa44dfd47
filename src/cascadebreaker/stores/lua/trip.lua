-- A process's own policy opened the circuit: open it fleet-wide unless the shared state moved on.
-- ARGV[4] = version the process saw, ARGV[5] = open wait ms, ARGV[6] = reason code,
-- ARGV[7] = 1 to skip the version check (resync after an outage: the local trip is fresh news),
-- ARGV[8] = detail for people, ARGV[9] = the failure ('Type: message' or ''),
-- ARGV[10..13] = fleet quorum: instance id ('' = no quorum), reporters, fraction, window ms.
-- With a quorum the trip is a vote: the circuit opens only once enough instances voted in this
-- closed round; otherwise nothing changes here and the caller stays open for itself alone.
local seen, wait_ms, why, force = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], ARGV[7] == '1'
local detail, failure = ARGV[8], ARGV[9]
local instance, reporters = ARGV[10], tonumber(ARGV[11])
local fraction, window_ms = tonumber(ARGV[12]), tonumber(ARGV[13])
local s = load()
if s.mode == 'NORMAL' and s.state == 'CLOSED'
    and (force or s.fresh or same_closed_round(s, seen)) then
  local met = true
  if instance ~= '' then
    redis.call('HSET', KEY, 'vote:' .. instance, num(NOW) .. ':' .. num(s.version))
    seen_now(instance)
    local voters, active = fleet(s, window_ms)
    met = quorum_met(voters, active, reporters, fraction)
    if met then detail = detail .. ' (' .. num(voters) .. ' instances)' end
  end
  if met then
    if failure ~= '' then s.failure = failure end
    open(s, wait_ms, why, detail)
  end
end
return finish(s, ADMIT)
