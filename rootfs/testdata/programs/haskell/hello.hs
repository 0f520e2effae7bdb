main :: IO ()
main = do
  name <- getLine
  putStrLn ("hello, " ++ name)
