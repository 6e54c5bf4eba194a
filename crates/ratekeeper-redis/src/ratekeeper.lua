-- ratekeeper: rate-limit decisions, atomic, on Redis's own clock.
--
-- KEYS: one state key per limit.
-- ARGV[1]: packed with struct: '<Bdd', the op (1 check, all or nothing over
--          KEYS; 2 peek; 3 refund; 5 refund before a deadline, which
--          takes the number of keys's place, in us; 6 report, one key: the
--          units counted whatever the limit says, replied as a check's;
--          7 hold and 8 settle a reservation, 9 take and 10 free an
--          in-flight slot, see below),
--          the number of keys, and 0 to use
--          Redis's clock (TIME) or a pinned time in us (a test hook: keys
--          written then live at least an hour); then '<Bdddd' per key: the
--          limit's kind (1 token bucket, 2 GCRA, 3 fixed window, 4 sliding
--          log, 5 sliding window), its three numbers (see each policy) and
--          the cost there (or the units refunded, at most 2^53).
--          Or a batch of independent calls: '<Bdd' 4, the number of calls,
--          the time as above; then per call '<Bd' its op and number of keys
--          (its own, in order in KEYS) and '<Bdddd' per key.
-- A reservation (7 hold, 8 settle) has two KEYS, the limit's key and its
-- reservations' hash (in the same slot: field, the id's 16 bytes; value
-- '<dd' its units and expiry in us), and after the limit '<c16dd': the
-- id, then the ttl in us (hold) or the actual units (settle; -1 cancels),
-- then the most a key holds open. A hold that finds the key full replies
-- -4 alone (after forgetting the expired); a settle of an id not open
-- replies -5 alone. Otherwise a hold replies as a check (and keeps the
-- reservation when allowed); a settle, as a report of the excess over
-- the units held, or as a peek after giving back the rest.
-- Numbers travel as doubles (exact integers below 2^53), in and out: one
-- unpack instead of a tonumber per number, one string instead of a table
-- for the reply.
--
-- Times are microseconds since the Unix epoch, every quantity an integer
-- below 2^53, so Lua's doubles hold them exactly. States are packed with
-- struct: a tag byte (the kind) then doubles; a state of another shape
-- counts as fresh. Each state also records the numbers it was made under
-- (see each policy), so that when a limit's numbers change (a reload) the
-- state is carried to the new ones, as the core's `Policy::carry` does,
-- rather than misread; a state without them (written by earlier versions)
-- is read as made under the numbers given.
--
-- Reply, doubles packed '<d...': for checks and peeks, six per limit
-- (allowed 1/0, remaining, reset us, reset ns part, retry us or -1 for
-- never, retry ns part), then the 1-based index of the first limit that
-- denied (0: none), then now; for refunds, now.
-- A batch's reply is its calls' replies one after another; a call that
-- met a key holding another type of value replies -2 alone (and changes
-- nothing).
--
-- Cost. What Redis spends per call, counted in instructions by
-- scripts/callgrind-redis.sh, is mostly its own: EVALSHA itself, and each
-- redis.call (TIME, GET, SET ... PX) with its reply turned into Lua values.
-- The script adds as little as it can: the decision is inline in one loop
-- over the keys (no function, so no closure made per call: every function
-- in a script's body is a new closure on each EVALSHA), redis.call and
-- math.floor are read once, the hot paths round with `x - x % 1` (floor,
-- exact for x >= 0) rather than a C call, states are written with PSETEX
-- (SET ... PX with fewer arguments and no options to parse; SET ... PXAT
-- costs more on Redis 7.0, which rewrites it for replicas all the same), or
-- with SET ... KEEPTTL (~7k instructions less) when the key already lives
-- long enough: a window's key within its window, a GCRA key until the
-- expiry its state records; one struct.unpack for the arguments and one for
-- the state, one struct.pack for the state and one for the reply, and no
-- table unless there are several keys.

-- The functions used (in the Redis 7 function form, the library's own,
-- read on its first call; see store.rs):
local sunpack, pack, call, floor, ceil = struct.unpack, struct.pack, redis.call, math.floor, math.ceil
local arg = ARGV[1]
local code, calls, now, kind, a, b, c, cost = sunpack('<BddBdddd', arg)
-- code: 1 check, 2 peek, 3 refund, 4 a batch (calls: how many calls),
-- 6 report
local pinned = now ~= 0
if not pinned then
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
end
if code == 5 then
  -- A refund applied only while now is before the deadline (us) the
  -- header's second number carries, what a lease gives back: units safe
  -- until then, and not after. Too late, it replies -3 and changes
  -- nothing.
  if now >= calls then
    return pack('<d', -3)
  end
  code = 3
end
if code == 9 or code == 10 then
  -- An in-flight slot (9 take, 10 free): KEYS[1] is the cap's sorted set
  -- of a key's slots (member the id's 16 bytes, score its lease's end in
  -- us), apart from states and reservations; the header's second number
  -- is the cap, the limit's first its lease in us; the id follows the
  -- header. A take forgets the slots whose lease ended, and keeps the id
  -- while fewer than the cap remain; it replies the slots taken before it
  -- and now. A free of an id not taken (or past its lease) replies -5
  -- alone, else now.
  local slots, lease = KEYS[1], a
  local id = sunpack('<c16', arg, 51)
  if code == 9 then
    call('ZREMRANGEBYSCORE', slots, '-inf', now)
    local taken = call('ZCARD', slots)
    if taken < calls then
      call('ZADD', slots, now + lease, id)
      -- The set lives as long as its last lease.
      local ms = ceil(lease / 1000) + 1
      if call('PTTL', slots) < ms then
        call('PEXPIRE', slots, ms)
      end
    end
    return pack('<dd', taken, now)
  end
  local until_us = call('ZSCORE', slots, id)
  if not until_us then
    return pack('<d', -5)
  end
  call('ZREM', slots, id)
  if tonumber(until_us) <= now then
    return pack('<d', -5)
  end
  return pack('<d', now)
end
local NEVER = -1
local n = #KEYS
-- A reservation's hash, and for a hold its id and expiry (us).
local registry, holding, hold_until
if code == 7 or code == 8 then
  n, registry = 1, KEYS[2]
end

-- A batch runs independent calls one after another, each as if alone
-- (each sees the states the calls before it left), and writes each key
-- it changed once, at the end: `cache` holds every key's latest state
-- (false: none), `order` the keys to write in the order first changed,
-- `wv` and `wt` the value (false: delete) and TTL (-1: keep the key's
-- own) to write. Its reply is the calls' replies one after another. A call
-- of several keys alone writes through the same list.
local batch = code == 4
local kb, kp = 0, 18
local parts, cache, order, wv, wt
if batch then
  parts, cache = {}, {}
else
  calls = 1
end
if batch or n ~= 1 then
  parts, order, wv, wt = parts or {}, {}, {}, {}
end
if registry then
  local id, extra, most = sunpack('<c16dd', arg, 51)
  if code == 7 then
    -- Full: forget the expired, and refuse if it still is.
    local open = call('HLEN', registry)
    if open >= most then
      local all = call('HGETALL', registry)
      for f = 1, #all, 2 do
        local _, until_us = sunpack('<dd', all[f + 1])
        if until_us <= now then
          call('HDEL', registry, all[f])
          open = open - 1
        end
      end
      if open >= most then
        return pack('<d', -4)
      end
    end
    code, holding, hold_until = 1, id, now + extra
  else
    local held = call('HGET', registry, id)
    if not held then
      return pack('<d', -5)
    end
    call('HDEL', registry, id)
    local units, until_us = sunpack('<dd', held)
    if until_us <= now then
      return pack('<d', -5)
    end
    local actual = extra < 0 and 0 or extra
    if actual > units then
      code, cost = 6, actual - units
    elseif actual < units then
      -- give back, then read the key as a peek in a second pass
      code, cost, calls = 3, units - actual, 2
    else
      code, cost = 2, 0
    end
  end
end

for call_index = 1, calls do
  if batch then
    -- this call's header: op, number of keys; then its first limit
    code, n, kind, a, b, c, cost = sunpack('<BdBdddd', arg, kp)
    kp = kp + 9
  end
  -- Several keys: decide each in order (a key given twice sees its
  -- earlier charge), and write only if every limit allows.
  local mine, states, ttls, out, carries
  local denied, broken = 0, false
  if n ~= 1 then
    mine, states, ttls, out = {}, {}, {}, {}
  end

  for i = 1, n do
    local key = KEYS[kb + i]
    local v
    if i ~= 1 then
      kind, a, b, c, cost = sunpack('<Bdddd', arg, kp + (i - 1) * 33)
      v = mine[key]
    end
    if v == nil and batch then
      v = cache[key]
    end
    if v == nil then
      if batch then
        -- A key of another type fails this call only (its reply: -2).
        v = redis.pcall('GET', key)
        if type(v) == 'table' then
          broken = true
          break
        end
        cache[key] = v
      else
        v = call('GET', key)
      end
    end
    -- The decision, from the stored state v (or false): allowed 1/0,
    -- remaining, reset us and ns part, retry us (-1 never) and ns part; new,
    -- the state to write (nil: none; false: delete, for refunds only), and
    -- ttl, its lifetime in us (-1: the key already expires with it).
    local allowed, remaining, rs, rsn, rt, rtn, new, ttl = 1, 0, 0, 0, 0, 0, nil, 0
    -- A state carried from other numbers, and its TTL: written even when
    -- the check changes nothing else, so that the change happens once, at
    -- this instant, as in the core.
    local carried, carried_ttl = nil, 0
    repeat -- `break` ends the decision
      if kind == 2 then
        -- GCRA. a = emission interval (ns), b = burst. The state is (at,
        -- ahead): the theoretical arrival time is `ahead` ns after `at` us
        -- (ahead may be negative). Any `at` names the same state, so `at`
        -- also says until when the key is known to live: this script writes
        -- at = e, an instant (in us, a multiple of 1/4) before the key's
        -- expiry, and while the new state is fresh again by e it keeps the
        -- key's TTL (SET ... KEEPTTL). Earlier versions wrote at = the time
        -- of the write, before any expiry they set, so their values read as
        -- "expiry unknown" and get a new one; they read ours correctly. Stored
        -- `ahead` stays within [-2^51, 2^53]: exact.
        -- The state records its interval after (at, ahead); one made under
        -- another keeps its outstanding units: ahead x interval / made,
        -- rounded up.
        local interval, burst = a, b
        local tol = interval * burst
        local r, e = 0, 0
        if v and (#v == 25 or #v == 17) then
          local tag, at, ahead, made = sunpack('<Bddd', v .. (#v == 17 and pack('<d', interval) or ''))
          if tag == 2 then
            r, e = ahead + (at - now) * 1000, at
            if made ~= interval and r > 0 and made > 0 then
              -- ceil(r x interval / made), exact while the reduced product
              -- fits 2^53, else one ns toward refusing
              local g, h = interval, made
              while h > 0 do
                g, h = h, g % h
              end
              local num, den = interval / g, made / g
              local q = floor(r / den)
              local rem = r - q * den
              local p = rem * num
              local c
              if p < 9007199254740992 then
                c = floor(p / den)
                while c * den > p do
                  c = c - 1
                end
                if c * den < p then
                  c = c + 1
                end
              else
                c = ceil(rem / den * num) + 1
              end
              r = q * num + c
              if r > 9007199254740992 then
                r = 9007199254740992
              end
              carried, carried_ttl = pack('<Bddd', 2, now, r, interval), ceil(r / 1000)
            end
          end
        end
        if code == 3 then
          if r > 0 and cost > 0 then
            r = r - cost * interval
            if r <= 0 then
              new = false
            elseif now + ceil(r / 1000) <= e then
              new, ttl = pack('<Bddd', 2, e, r - (e - now) * 1000, interval), -1
            else
              new, ttl = pack('<Bddd', 2, now, r, interval), ceil(r / 1000)
            end
          end
          break
        end
        local current = r > 0 and r or 0
        local ahead = current + cost * interval
        -- (what only a denial reports is worked out after this branch)
        if ahead <= tol and cost <= burst then
          local us = ahead / 1000
          us = us - us % 1
          local q = (tol - ahead) / interval
          remaining, rs, rsn = q - q % 1, us, ahead - us * 1000
          if cost > 0 and (code == 1 or code == 6) then
            -- fresh again by now + us + 1
            if now + us < e then
              new, ttl = pack('<Bddd', 2, e, ahead - (e - now) * 1000, interval), -1
            else
              -- A new expiry a quarter of the state's lifetime later than
              -- needed, so a key hit near its rate sets one about every
              -- burst / 4 hits, and outlives its state by at most that
              -- quarter (and the 1-2 ms the TTL is rounded up by, which also
              -- makes the key outlive e itself). e - now is a multiple of
              -- 1/4 us, so (e - now) x 1000 is an integer (below 2^54, even:
              -- exact) and so is ahead less it.
              local slack = (us + 1) * 1.25
              e = now + slack
              new, ttl = pack('<Bddd', 2, e, ahead - slack * 1000, interval), slack
            end
          end
          break
        end
        if code == 6 and cost > 0 then
          -- A report past the tolerance: counted all the same, the TAT at
          -- most 2^53 ns ahead; refused until one interval fits again.
          if ahead > 9007199254740992 then
            ahead = 9007199254740992
          end
          local us = floor(ahead / 1000)
          local over = ahead - tol + interval
          if over < 0 then
            over = 0
          end
          local over_us = floor(over / 1000)
          allowed, remaining, rs, rsn = 0, 0, us, ahead - us * 1000
          rt, rtn = over_us, over - over_us * 1000
          new, ttl = pack('<Bddd', 2, now, ahead, interval), ceil(ahead / 1000)
          break
        end
        local left = tol - current
        if left > 0 then
          left = left / interval
          left = left - left % 1
        else
          left = 0
        end
        local cur_us = current / 1000
        cur_us = cur_us - cur_us % 1
        allowed, remaining, rs, rsn = 0, left, cur_us, current - cur_us * 1000
        if cost > burst then
          rt = NEVER
          break
        end
        local over = ahead - tol
        local over_us = floor(over / 1000)
        rt, rtn = over_us, over - over_us * 1000
      elseif kind == 1 then
        -- Token bucket. a = full (burst x unit), b = unit (units per token),
        -- c = gain (units per ns): the core's exact integer bucket. The state
        -- (level, at, unit, full, gain) records its numbers: one made under
        -- others keeps the tokens used and not yet back at now, rounded up.
        -- (Earlier versions recorded only the unit, and such a state keeps
        -- its tokens, rounded down.)
        local full, unit, gain = a, b, c
        local level, at = full, now
        if v and #v == 41 then
          local tag, l, t, from, mfull, mgain = sunpack('<Bddddd', v)
          if tag == 1 then
            level, at = l, t
            if (from ~= unit or mfull ~= full or mgain ~= gain) and from > 0 then
              local t2 = t > now and t or now
              local d = mfull - l
              if d < 0 then
                d = 0
              end
              d = d - (t2 - t) * 1000 * mgain
              if d < 0 then
                d = 0
              end
              -- ceil(d x unit / from), exact while the reduced product fits
              -- 2^53, else one unit toward refusing
              local g, h = unit, from
              while h > 0 do
                g, h = h, g % h
              end
              local num, den = unit / g, from / g
              local q = floor(d / den)
              local p = (d - q * den) * num
              local f
              if p < 9007199254740992 then
                f = floor(p / den)
                while f * den > p do
                  f = f - 1
                end
                if f * den < p then
                  f = f + 1
                end
              else
                f = ceil((d - q * den) / den * num) + 1
              end
              level, at = full - (q * num + f), t2
              if level < full then
                carried = pack('<Bddddd', 1, level, at, unit, full, gain)
                carried_ttl = at - now + ceil(ceil((full - level) / gain) / 1000)
              end
            end
          end
        elseif v and #v == 25 then
          local tag, l, t, from = sunpack('<Bddd', v)
          if tag == 1 then
            level, at = l, t
            if from ~= unit and from > 0 then
              -- floor(level x unit / from): whole tokens exactly, the rest
              -- exactly below 2^53 and one unit short otherwise (never more)
              local q = floor(level / from)
              local x = (level - q * from) * unit
              local f = floor(x / from)
              if x > 9007199254740992 and f > 0 then
                f = f - 1
              end
              level = q * unit + f
            end
          end
        end
        local at2 = at > now and at or now
        local deficit = full - level
        if deficit < 0 then
          deficit = 0
        end
        deficit = deficit - (at2 - at) * 1000 * gain
        if deficit < 0 then
          deficit = 0
        end
        -- waits are told from now, the state measured at at2
        local skew = (at2 - now) * 1000
        if code == 3 then
          if cost > 0 then
            deficit = deficit - cost * unit
            if deficit <= 0 then
              new = false
            else
              new = pack('<Bddddd', 1, full - deficit, at2, unit, full, gain)
              ttl = at2 - now + ceil(ceil(deficit / gain) / 1000)
            end
          end
          break
        end
        local after = deficit + cost * unit
        -- (what only a denial reports is worked out after this branch)
        if after <= full and cost <= full / unit then
          local fill = after
          if gain ~= 1 then
            fill = after / gain
            local whole = fill - fill % 1
            fill = whole < fill and whole + 1 or whole
          end
          local w = fill + skew
          local us = w / 1000
          us = us - us % 1
          local q = (full - after) / unit
          remaining, rs, rsn = q - q % 1, us, w - us * 1000
          if cost > 0 and (code == 1 or code == 6) then
            new = pack('<Bddddd', 1, full - after, at2, unit, full, gain)
            local t = fill / 1000
            local whole = t - t % 1
            ttl = at2 - now + (whole < t and whole + 1 or whole)
          end
          break
        end
        if code == 6 and cost > 0 then
          -- A report past a full bucket's worth: the bucket goes into debt
          -- (at most 2^53 units), refused until the debt and a token more
          -- have refilled.
          if after > 9007199254740992 then
            after = 9007199254740992
          end
          local fill = gain == 1 and after or ceil(after / gain)
          local w = fill + skew
          local us = floor(w / 1000)
          local over = after - full + unit
          local retry = (gain == 1 and over or ceil(over / gain)) + skew
          local retry_us = floor(retry / 1000)
          allowed, remaining, rs, rsn = 0, 0, us, w - us * 1000
          rt, rtn = retry_us, retry - retry_us * 1000
          new = pack('<Bddddd', 1, full - after, at2, unit, full, gain)
          ttl = at2 - now + ceil(fill / 1000)
          break
        end
        -- ns to refill the deficit, from now
        local reset = deficit
        if gain ~= 1 then
          reset = deficit / gain
          local whole = reset - reset % 1
          reset = whole < reset and whole + 1 or whole
        end
        reset = reset + skew
        local reset_us = reset / 1000
        reset_us = reset_us - reset_us % 1
        -- (a bucket in debt, from a report, has nothing left)
        local left = deficit < full and (full - deficit) / unit or 0
        left = left - left % 1
        allowed, remaining, rs, rsn = 0, left, reset_us, reset - reset_us * 1000
        if cost > full / unit then
          rt = NEVER
          break
        end
        local over = after - full
        local retry = (gain == 1 and over or ceil(over / gain)) + skew
        local retry_us = floor(retry / 1000)
        rt, rtn = retry_us, retry - retry_us * 1000
      elseif kind == 3 then
        -- Fixed window. a = limit, b = window (us), c = 1 when each window
        -- opens at the key's first hit, 0 when aligned to the epoch.
        -- The state (start, count, window, c) records its window and
        -- alignment: under others, the count in force at now moves into
        -- the window holding now (as the core's FixedWindow::carry_from).
        local limit, window = a, b
        local st, cnt, moved = 0, 0, false
        if v and (#v == 33 or #v == 17) then
          local tag, s0, c0, mw, mc = sunpack('<Bdddd', v .. (#v == 17 and pack('<dd', window, c) or ''))
          if tag == 3 then
            st, cnt = s0, c0
            if (mw ~= window or mc ~= c) and mw > 0 then
              local at = s0 > now and s0 or now
              local live = 0
              if mc == 1 then
                if c0 > 0 and now < s0 + mw then
                  live = c0
                end
              elseif now - now % mw <= s0 then
                live = c0
              end
              if live > 0 then
                st, cnt, moved = c == 1 and at or at - at % window, live, true
                carried, carried_ttl = pack('<Bdddd', 3, st, cnt, window, c), st + window - now
              else
                st, cnt = 0, 0
              end
            end
          end
        end
        local start = now - now % window
        local count = 0
        if c == 1 then
          -- The state's window while it lasts; else the next hit opens one.
          if cnt > 0 and now < st + window then
            start, count = st, cnt
          else
            start = now
          end
        elseif start == st then
          count = cnt
        elseif start < st then
          start, count = st, cnt
        end
        local until_end = start + window - now
        if until_end < 0 then
          until_end = 0
        end
        if code == 3 then
          if cost > 0 and count > 0 then
            count = count - cost
            if count <= 0 then
              new = false
            else
              new, ttl = pack('<Bdddd', 3, start, count, window, c), start + window - now
            end
          end
          break
        end
        local room = limit - count
        if room < 0 then
          room = 0
        end
        if cost <= room then
          remaining, rs = room - cost, (c == 1 and count + cost == 0) and 0 or until_end
          if cost > 0 and (code == 1 or code == 6) then
            new = pack('<Bdddd', 3, start, count + cost, window, c)
            -- the key already expires at this window's end: keep its TTL
            -- (unless its state was just carried from another window)
            ttl = (start == st and cnt > 0 and not moved) and -1 or start + window - now
          end
          break
        end
        if code == 6 and cost > 0 then
          -- A report past the limit: counted (at most 2^53), refused until
          -- the window ends.
          local total = count + cost
          if total > 9007199254740992 then
            total = 9007199254740992
          end
          allowed, remaining, rs, rt = 0, 0, until_end, until_end
          new, ttl = pack('<Bdddd', 3, start, total, window, c), start + window - now
          break
        end
        allowed, remaining, rs = 0, room, (c == 1 and count == 0) and 0 or until_end
        rt = cost > limit and NEVER or until_end
      elseif kind == 5 then
        -- Sliding window counter. a = limit, b = window (us), limit x window
        -- below 2^53.
        -- The state (start, previous, current, window) records its window:
        -- under another, the old estimate at now becomes the current count
        -- of the window holding now (as the core's carry_from).
        local limit, window = a, b
        local st, p, cr, moved = 0, 0, 0, false
        if v and (#v == 33 or #v == 25) then
          local tag, s0, p0, c0, mw = sunpack('<Bdddd', v .. (#v == 25 and pack('<d', window) or ''))
          if tag == 5 then
            st, p, cr = s0, p0, c0
            if mw ~= window and mw > 0 then
              local os = now - now % mw
              local op, oc, oe = 0, 0, now - os
              if os == s0 then
                op, oc = p0, c0
              elseif os > s0 then
                if os - s0 == mw then
                  op = c0
                end
              else
                os, op, oc, oe = s0, p0, c0, 0
              end
              local est = oc
              if op > 0 then
                local e2 = oe < mw and oe or mw
                est = est + ceil(op * (mw - e2) / mw)
              end
              if est > 0 then
                local at = os > now and os or now
                st, p, cr, moved = at - at % window, 0, est, true
                carried, carried_ttl = pack('<Bdddd', 5, st, 0, est, window), st + 2 * window - now
              else
                st, p, cr = 0, 0, 0
              end
            end
          end
        end
        local start = now - now % window
        local prev, cur, elapsed = 0, 0, now - start
        if start == st then
          prev, cur = p, cr
        elseif start > st then
          if start - st == window then
            prev = cr
          end
        else
          start, prev, cur, elapsed = st, p, cr, 0
        end
        if code == 3 then
          if cost > 0 then
            local fc = cost < cur and cost or cur
            local fp = cost - fc
            if fp > prev then
              fp = prev
            end
            cur, prev = cur - fc, prev - fp
            if cur == 0 and prev == 0 then
              new = false
            else
              local ends = cur > 0 and start + 2 * window or start + window
              new, ttl = pack('<Bdddd', 5, start, prev, cur, window), ends - now
            end
          end
          break
        end
        local weighted = 0
        if prev > 0 then
          local e = elapsed < window and elapsed or window
          weighted = ceil(prev * (window - e) / window)
        end
        local room = limit - cur - weighted
        if room < 0 then
          room = 0
        end
        -- until the quota is whole: both windows, or the previous one, gone
        local reset = 0
        if cur + cost > 0 and cost <= room then
          reset = start + 2 * window - now
        elseif cur > 0 then
          reset = start + 2 * window - now
        elseif prev > 0 then
          reset = start + window - now
        end
        if reset < 0 then
          reset = 0
        end
        if cost <= room then
          remaining, rs = room - cost, reset
          if cost > 0 and (code == 1 or code == 6) then
            new = pack('<Bdddd', 5, start, prev, cur + cost, window)
            -- a key whose current window counts already expires with it
            -- (unless its state was just carried from another window)
            ttl = (start == st and cr > 0 and not moved) and -1 or start + 2 * window - now
          end
          break
        end
        allowed, remaining, rs = 0, room, reset
        if code == 6 and cost > 0 then
          -- A report past the limit: counted in the current window (at
          -- most 2^53 / window, so products stay exact); the wait is for
          -- one unit to fit.
          local most = floor(9007199254740992 / window)
          cur = cur + cost
          if cur > most then
            cur = most
          end
          remaining, rs = 0, start + 2 * window - now
          new, ttl = pack('<Bdddd', 5, start, prev, cur, window), start + 2 * window - now
          cost = 1
        end
        if cost > limit then
          rt = NEVER
          break
        end
        -- The least elapsed time at which ceil(count x (window - elapsed) /
        -- window) <= room, in us and ns as the core counts it (in ns):
        -- window - floor(room x window / count).
        local budget = limit - cost
        local us, ns
        if cur <= budget then
          us, ns = 0, 0
          if prev > 0 then
            local x = (budget - cur) * window
            local q = floor(x / prev)
            local f = floor((x - q * prev) * 1000 / prev)
            if q >= window then
              us, ns = 0, 0
            elseif f == 0 then
              us, ns = window - q, 0
            else
              us, ns = window - q - 1, 1000 - f
            end
          end
          if us < window then
            us = start + us - now
          else
            us = nil
          end
        end
        if not us then
          -- in the next window the current count becomes the previous one
          us, ns = 0, 0
          if cur > 0 then
            local x = budget * window
            local q = floor(x / cur)
            local f = floor((x - q * cur) * 1000 / cur)
            if q >= window then
              us, ns = 0, 0
            elseif f == 0 then
              us, ns = window - q, 0
            else
              us, ns = window - q - 1, 1000 - f
            end
          end
          us = start + window + us - now
        end
        if us < 0 then
          us, ns = 0, 0
        end
        rt, rtn = us, ns
      elseif kind == 4 then
        -- The sliding log. a = limit, b = window (us). The state: a header
        -- (tag, base) then one record (at, cumulative cost) per instant with
        -- allowed hits, oldest first; a record's cost is its cumulative minus
        -- the one before (or base). Record r is at byte r x 16 - 6. (No
        -- helper functions: each would be a closure made on every call, with
        -- its upvalues, ~2k instructions of allocation together.)
        -- The state ends with the window it was made under (8 bytes; earlier
        -- versions wrote none): under another, the hits still in the old
        -- window move later by how much shorter the window got, but not past
        -- the newest instant, and those meeting on one instant merge (as
        -- the core's SlidingLog::carry_from).
        local limit, window = a, b
        local records, base = 0, 0
        if v and #v >= 17 and (#v - 17) % 16 == 0 then
          local tag, b0 = sunpack('<Bd', v)
          if tag == 4 then
            records, base = (#v - 17) / 16, b0
            local mw = sunpack('<d', v, #v - 7)
            if mw ~= window and records > 0 then
              local na = sunpack('<d', v, records * 16 - 6)
              local top = na > now and na or now
              local shift = mw > window and mw - window or 0
              local out, last_at = { pack('<Bd', 4, b0) }, -1
              for r = 1, records do
                local x, y = sunpack('<dd', v, r * 16 - 6)
                if x + mw > top then
                  local x2 = x + shift
                  if x2 > top then
                    x2 = top
                  end
                  if x2 == last_at then
                    out[#out] = pack('<dd', x2, y)
                  else
                    out[#out + 1] = pack('<dd', x2, y)
                  end
                  last_at = x2
                else
                  -- a hit gone from the old window: it moves into the base
                  out[1] = pack('<Bd', 4, y)
                end
              end
              out[#out + 1] = pack('<d', window)
              v = table.concat(out)
              records, base = (#v - 17) / 16, sunpack('<d', v, 2)
              if records > 0 then
                carried, carried_ttl = v, sunpack('<d', v, records * 16 - 6) + window - now
              end
            end
          end
        elseif v and #v >= 9 and (#v - 9) % 16 == 0 then
          local tag, b0 = sunpack('<Bd', v)
          if tag == 4 then
            records, base = (#v - 9) / 16, b0
          end
        end
        local newest, newest_cum = 0, base
        if records > 0 then
          newest, newest_cum = sunpack('<dd', v, records * 16 - 6)
        end
        local at2 = newest > now and newest or now
        -- the first record still in the window: its hits leave after at2
        local lo, hi = 1, records + 1
        while lo < hi do
          local mid = floor((lo + hi) / 2)
          if sunpack('<d', v, mid * 16 - 6) + window <= at2 then
            lo = mid + 1
          else
            hi = mid
          end
        end
        local j = lo
        local before = base
        if j > 1 then
          local _
          _, before = sunpack('<dd', v, j * 16 - 22)
        end
        local last_at, last = 0, before
        if j <= records then
          last_at, last = newest, newest_cum
        end
        local used = last - before
        -- The state to write: the live records j..upto as stored, then a last
        -- record (wat, wcm).
        local upto, wat, wcm
        if code == 3 then
          if cost == 0 then
            break
          end
          -- refunds come off the newest hits
          local k, left, ck = records, cost, last
          while left > 0 and k >= j do
            local pc = before
            if k > j then
              local _
              _, pc = sunpack('<dd', v, k * 16 - 22)
            end
            if ck - pc > left then
              break
            end
            left = left - (ck - pc)
            k, ck = k - 1, pc
          end
          if k < j then
            new = false
            break
          end
          upto, wat, wcm = k - 1, sunpack('<d', v, k * 16 - 6), ck - left
          ttl = wat + window - now
        else
          local room = limit - used
          if room < 0 then
            room = 0
          end
          local reset = 0
          if j <= records then
            reset = last_at + window - now
            if reset < 0 then
              reset = 0
            end
          end
          if cost == 0 then
            remaining, rs = room, reset
            break
          end
          if cost > room and code == 6 then
            -- A report past the limit: logged all the same (at most 2^50
            -- units live), added to the newest record, moved to now, when
            -- the key was at its limit already (no record more).
            local total = used + cost
            if total > 1125899906842624 then
              total = 1125899906842624
            end
            upto = (j <= records and (last_at == at2 or used >= limit)) and records - 1 or records
            wat, wcm, ttl = at2, before + total, at2 + window - now
            -- the wait until one unit fits: the oldest hits out until the
            -- rest and it fit
            local need = before + total - (limit - 1)
            local fit = wat
            if upto >= j then
              local _, top = sunpack('<dd', v, upto * 16 - 6)
              if top >= need then
                lo, hi = j, upto
                while lo < hi do
                  local mid = floor((lo + hi) / 2)
                  local _, cm = sunpack('<dd', v, mid * 16 - 6)
                  if cm >= need then
                    hi = mid
                  else
                    lo = mid + 1
                  end
                end
                fit = sunpack('<d', v, lo * 16 - 6)
              end
            end
            local retry = fit + window - now
            if retry < 0 then
              retry = 0
            end
            allowed, remaining, rs, rt = 0, 0, wat + window - now, retry
          elseif cost > room then
            allowed, remaining, rs = 0, room, reset
            if cost > limit then
              rt = NEVER
              break
            end
            -- walk the oldest hits out until the request fits
            local need = before + used - (limit - cost)
            lo, hi = j, records
            while lo < hi do
              local mid = floor((lo + hi) / 2)
              local _, cm = sunpack('<dd', v, mid * 16 - 6)
              if cm >= need then
                hi = mid
              else
                lo = mid + 1
              end
            end
            local retry = sunpack('<d', v, lo * 16 - 6) + window - now
            if retry < 0 then
              retry = 0
            end
            rt = retry
            break
          end
          if allowed == 1 then
            remaining, rs = room - cost, at2 + window - now
            if code ~= 1 and code ~= 6 then
              break
            end
            -- hits at the newest record's instant join it
            upto = (j <= records and last_at == at2) and records - 1 or records
            wat, wcm, ttl = at2, last + cost, at2 + window - now
          end
        end
        if before > 1125899906842624 then
          -- past 2^50: rebase the cumulative costs on zero
          local parts = { pack('<Bd', 4, 0) }
          for r = j, upto do
            local x, y = sunpack('<dd', v, r * 16 - 6)
            parts[#parts + 1] = pack('<dd', x, y - before)
          end
          parts[#parts + 1] = pack('<ddd', wat, wcm - before, window)
          new = table.concat(parts)
        elseif upto < j then
          new = pack('<Bdddd', 4, before, wat, wcm, window)
        elseif j == 1 then
          new = string.sub(v, 1, 9 + upto * 16) .. pack('<ddd', wat, wcm, window)
        else
          new = pack('<Bd', 4, before) .. string.sub(v, j * 16 - 6, 9 + upto * 16) .. pack('<ddd', wat, wcm, window)
        end
      else
        error('ratekeeper: unknown policy kind ' .. tostring(kind))
      end
    until true
    if new == nil and carried and (code == 1 or code == 6) then
      new, ttl = carried, carried_ttl
    end

    if not batch and n == 1 then
      -- One key, alone: nothing allocated but the new state and the reply.
      if new == false then
        if v then
          call('DEL', key)
        end
      elseif new then
        -- the TTL (us) rounded up to ms, plus one; or the key's own when
        -- the policy says it already expires with the state (-1)
        if ttl < 0 then
          call('SET', key, new, 'KEEPTTL')
        else
          local ms = ttl / 1000
          local whole = ms - ms % 1
          ms = (whole < ms and whole + 2 or whole + 1)
          if pinned and ms < 3600000 then
            ms = 3600000
          end
          -- PSETEX is SET ... PX with one argument and no options to parse
          call('PSETEX', key, ms, new)
        end
      end
      if holding and allowed == 1 then
        call('HSET', registry, holding, pack('<dd', cost, hold_until))
        local ms = ceil((hold_until - now) / 1000) + 1
        if call('PTTL', registry) < ms then
          call('PEXPIRE', registry, ms)
        end
      end
      if code == 3 and call_index < calls then
        -- a settle that gave units back: now the key's status
        code, cost = 2, 0
      elseif code == 3 then
        return pack('<d', now)
      else
        return pack('<dddddddd', allowed, remaining, rs, rsn, rt, rtn, 1 - allowed, now)
      end
    elseif n == 1 then
      -- one key in a batch
      if code ~= 3 then
        parts[call_index] = pack('<dddddddd', allowed, remaining, rs, rsn, rt, rtn, 1 - allowed, now)
      end
      if new ~= nil then
        cache[key] = new
        if wv[key] == nil then
          order[#order + 1] = key
        end
        wv[key] = new
        if ttl >= 0 or wt[key] == nil then
          wt[key] = ttl
        end
      end
    else
      if code ~= 3 then
        local o = (i - 1) * 6
        out[o + 1], out[o + 2], out[o + 3] = allowed, remaining, rs
        out[o + 4], out[o + 5], out[o + 6] = rsn, rt, rtn
        if allowed == 0 and denied == 0 then
          denied = i
        end
      end
      if new ~= nil then
        mine[key] = new
        states[i], ttls[i] = new, ttl
      end
      if carried and code == 1 then
        -- written even if another limit refuses (see `carried`)
        carries = carries or {}
        carries[i] = { carried, carried_ttl }
      end
    end
  end

  if broken then
    parts[call_index] = pack('<d', -2)
  elseif n ~= 1 then
    if denied == 0 and code ~= 2 then
      for i = 1, n do
        local key, new, ttl = KEYS[kb + i], states[i], ttls[i]
        if new ~= nil then
          if batch then
            cache[key] = new
          end
          if wv[key] == nil then
            order[#order + 1] = key
          end
          wv[key] = new
          if ttl >= 0 or wt[key] == nil then
            wt[key] = ttl
          end
        end
      end
    elseif carries then
      for i, c in pairs(carries) do
        local key = KEYS[kb + i]
        if batch then
          cache[key] = c[1]
        end
        if wv[key] == nil then
          order[#order + 1] = key
        end
        wv[key] = c[1]
        if c[2] >= 0 or wt[key] == nil then
          wt[key] = c[2]
        end
      end
    end
    local reply
    if code == 3 then
      reply = pack('<d', now)
    else
      out[n * 6 + 1] = denied
      out[n * 6 + 2] = now
      -- (unpack here is Lua's, of a table)
      reply = pack('<' .. string.rep('d', n * 6 + 2), unpack(out))
    end
    parts[call_index] = reply
  elseif code == 3 then
    parts[call_index] = pack('<d', now)
  end
  if batch then
    kb, kp = kb + n, kp + n * 33
  end
end

-- the writes, one per key
for w = 1, #order do
  local key = order[w]
  local new, ttl = wv[key], wt[key]
  if new == false then
    call('DEL', key)
  elseif ttl < 0 then
    call('SET', key, new, 'KEEPTTL')
  else
    local ms = ceil(ttl / 1000) + 1
    if pinned and ms < 3600000 then
      ms = 3600000
    end
    call('PSETEX', key, ms, new)
  end
end
if not batch then
  return parts[1]
end
return table.concat(parts)
