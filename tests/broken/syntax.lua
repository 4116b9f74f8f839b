-- A missing "then": Lua's own syntax error, with the line.
local B = dim("B", 4)
if B == B
  output("y", relu(input("x", f32, { B, 3 })))
end
