defmodule Loop do
  def run(n), do: run(n + 1)
end

Loop.run(0)
