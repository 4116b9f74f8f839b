-- A call's T new rows must fit in the S rows the cache holds after it.
local T = dim("T", 32)
local S = dim("S", 16)
local k = input("k", f32, { 2, 3, T, 4 })
output("y", kv_cache("cache.k", k, S))
