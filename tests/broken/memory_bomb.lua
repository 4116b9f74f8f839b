-- Doubles a string until the memory budget stops it.
local s = "x"
for _ = 1, 40 do
  s = string.rep(s, 2)
end
output("y", relu(input("x", f32, { #s })))
