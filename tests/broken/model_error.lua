-- The model checks its own configuration.
local cfg = config { d = 10, heads = 3 }
if cfg.d % cfg.heads ~= 0 then
  error("heads (3) must divide d (10)")
end
output("y", relu(input("x", f32, { cfg.d })))
