-- [B,10] + [B,12]: the last dims differ and neither is 1.
local B = dim("B", 16)
local a = input("a", f32, { B, 10 })
local b = input("b", f32, { B, 12 })
output("y", a + b)
