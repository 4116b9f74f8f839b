-- A string where a tensor is expected.
local x = input("x", f32, { 3 })
output("y", relu("x"))
