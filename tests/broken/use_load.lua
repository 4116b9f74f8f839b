-- No compiling code from strings.
local f = load("return 3")
output("y", relu(input("x", f32, { f() })))
