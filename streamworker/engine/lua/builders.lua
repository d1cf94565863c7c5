-- Reply tables built by one call from Python (cheaper than a lupa table_from per level); scripting.py runs it once per state and gets array, row, rows.
local function array(...)
  return {...}
end

local function row(...)
  return {{...}}
end

local function rows(n, ...)
  local v = {...}
  local out, k = {}, n
  for r = 1, n do
    local t = {}
    for c = 1, v[r] do
      t[c] = v[k + c]
    end
    k = k + v[r]
    out[r] = t
  end
  return out
end

return array, row, rows
