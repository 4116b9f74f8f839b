-- f32 + i32: no implicit conversion.
local a = input("a", f32, { 5 })
local b = input("b", i32, { 5 })
output("y", a + b)
