-- Weights have a fixed size: a batch dim in a parameter shape is an error.
local B = dim("B", 8)
local x = input("x", f32, { B, 3 })
output("y", x + param("bias", { B, 3 }))
