-- Outcome of a half-open probe admitted in round (version) ARGV[4] with ticket ARGV[7]. A probe
-- from another round changes nothing. The verdict mirrors core/probes.py.
-- ARGV[5] = 'S', 'F' or 'I' (ignored: frees its slot, unless the lease took it back already),
-- ARGV[6] = '1' if the probe was slow, ARGV[8] = successes needed to close (classic),
-- ARGV[9] = probes in a round, ARGV[10] = failure rate judging the round ('0': classic),
-- ARGV[11] = slow-call rate judging the round ('0': slowness not judged),
-- ARGV[12] = open wait ms on reopening, ARGV[13] = the failure ('Type: message' or '').
local round, outcome, slow = tonumber(ARGV[4]), ARGV[5], ARGV[6] == '1'
local ticket, needed, budget = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local rate, slow_rate, wait_ms = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local failure = ARGV[13]
local s = load()
if s.mode ~= 'NORMAL' or s.state ~= 'HALF_OPEN' or s.version ~= round then
  return finish(s, ADMIT)
end
s.dirty = true
if outcome == 'I' then
  if ticket > s.reclaimed then s.probes = math.max(0, s.probes - 1) end
  return finish(s, ADMIT)
end
local failed = outcome == 'F'
s.p_calls = s.p_calls + 1
if failed then
  s.p_fail = s.p_fail + 1
  if failure ~= '' then s.failure = failure end
end
if slow then s.p_slow = s.p_slow + 1 end
if rate <= 0 then
  -- classic: the first failed (or slow) probe reopens; `needed` good probes close
  if failed then
    open(s, wait_ms, 'probe_failed', 'a probe failed')
  elseif slow then
    open(s, wait_ms, 'probe_slow', 'a probe was slow')
  else
    s.probe_ok = s.probe_ok + 1
    if s.probe_ok >= needed then
      close(s, 'probes_succeeded', num(s.probe_ok) .. ' probe(s) succeeded')
    end
  end
  return finish(s, ADMIT)
end
-- window: the round's probes judged by their failure (and slow-call) rate, once certain
local left = math.max(0, budget - s.p_calls)
local judging_slow = slow_rate > 0
if s.p_fail >= rate * budget then
  open(s, wait_ms, 'probe_failed', num(s.p_fail) .. '/' .. num(budget) .. ' probes failed')
elseif judging_slow and s.p_slow >= slow_rate * budget then
  open(s, wait_ms, 'probe_slow', num(s.p_slow) .. '/' .. num(budget) .. ' probes were slow')
elseif s.p_fail + left < rate * budget
    and not (judging_slow and s.p_slow + left >= slow_rate * budget) then
  close(s, 'probes_succeeded',
    num(s.p_calls - s.p_fail) .. '/' .. num(s.p_calls) .. ' probes succeeded')
end
return finish(s, ADMIT)
