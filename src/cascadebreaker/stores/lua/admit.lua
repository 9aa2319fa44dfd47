-- May a call start? Moves OPEN -> HALF_OPEN when the wait is over and hands out the fleet-wide
-- probe budget, one ticket per probe. ARGV[4] = half_open_max_calls, ARGV[5] = probe lease ms,
-- ARGV[6] = max half-open ms (0: no cap), ARGV[7] = open wait ms if the cap reopens the circuit.
local max_calls, lease_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
local cap_ms, wait_ms = tonumber(ARGV[6]), tonumber(ARGV[7])
local s = load()
if s.mode == 'DISABLED' then return finish(s, ADMIT) end
if s.mode == 'FORCED_OPEN' then return finish(s, REJECT) end
if s.state == 'CLOSED' then return finish(s, ADMIT) end
if s.state == 'OPEN' then
  if NOW < s.open_until then return finish(s, REJECT) end
  half_open(s)
elseif cap_ms > 0 and NOW - s.half_since >= cap_ms then
  open(s, wait_ms, 'half_open_timeout', 'half-open for ' .. num(cap_ms) .. ' ms')
  return finish(s, REJECT)
end
-- Probes whose lease ran out are presumed lost (their process died): take their slots back.
-- Their tickets (up to `reclaimed`) may still report, but an ignored one frees no slot.
if s.probes >= max_calls and NOW >= s.lease_until then
  s.probes = 0
  s.reclaimed = s.issued
  s.dirty = true
end
if s.probes < max_calls then
  s.probes = s.probes + 1
  s.issued = s.issued + 1
  s.ticket = s.issued
  s.lease_until = NOW + lease_ms
  s.dirty = true
  return finish(s, PROBE)
end
return finish(s, REJECT)
