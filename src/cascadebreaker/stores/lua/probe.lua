-- Outcome of a half-open probe admitted in round (version) ARGV[4]. A probe from an older round
-- changes nothing. ARGV[5] = 'S', 'F' or 'I' (ignored: frees its slot),
-- ARGV[6] = successes needed to close, ARGV[7] = open wait ms on failure.
local round, outcome = tonumber(ARGV[4]), ARGV[5]
local needed, wait_ms = tonumber(ARGV[6]), tonumber(ARGV[7])
local s = load()
if s.mode ~= 'NORMAL' or s.state ~= 'HALF_OPEN' or s.version ~= round then
  return finish(s, ADMIT)
end
if outcome == 'F' then
  open(s, wait_ms, 'probe failed')
elseif outcome == 'S' then
  s.probe_ok = s.probe_ok + 1
  s.dirty = true
  if s.probe_ok >= needed then close(s, num(s.probe_ok) .. ' probe(s) succeeded') end
else
  s.probes = math.max(0, s.probes - 1)
  s.dirty = true
end
return finish(s, ADMIT)
