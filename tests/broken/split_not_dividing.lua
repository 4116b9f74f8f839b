-- 10 columns do not split into 3 equal parts.
local x = input("x", f32, { 2, 10 })
local a, b, c = split(x, 3, 2)
output("y", a + b + c)
