-- A weight tensor given to linear expects 21 input features; x has 20.
local x = input("x", f32, { 3, 20 })
local w = param("proj.weight", { 7, 21 })
output("y", linear(x, 7, w, { bias = false }))
