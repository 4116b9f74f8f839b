-- Concatenating along axis 2 needs equal dims on axis 1 (3 vs 4).
local a = input("a", f32, { 3, 5 })
local b = input("b", f32, { 4, 5 })
output("y", concat({ a, b }, 2))
