-- Doubles a string with .. until the memory budget stops it.
local s = "x"
while true do
  s = s .. s
end
