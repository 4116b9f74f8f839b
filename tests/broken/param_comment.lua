-- a parameter name that would close a comment of the generated sources
local x = input("x", f32, { 2, 3 })
output("y", linear(x, 4, param("fc*/x")))
