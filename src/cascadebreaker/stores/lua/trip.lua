-- A process's own policy opened the circuit: open it fleet-wide unless the shared state moved on.
-- ARGV[4] = version the process saw, ARGV[5] = open wait ms, ARGV[6] = reason code,
-- ARGV[7] = 1 to skip the version check (resync after an outage: the local trip is fresh news),
-- ARGV[8] = detail for people, ARGV[9] = the failure ('Type: message' or '').
local seen, wait_ms, why, force = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], ARGV[7] == '1'
local detail, failure = ARGV[8], ARGV[9]
local s = load()
if s.mode == 'NORMAL' and s.state == 'CLOSED' and (force or s.fresh or s.version == seen) then
  if failure ~= '' then s.failure = failure end
  open(s, wait_ms, why, detail)
end
return finish(s, ADMIT)
