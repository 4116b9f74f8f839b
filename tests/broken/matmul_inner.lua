-- [B,5,7] . [6,3]: the inner dims 7 and 6 differ.
local B = dim("B", 4)
local a = input("a", f32, { B, 5, 7 })
local b = input("b", f32, { 6, 3 })
output("y", matmul(a, b))
