main :: IO ()
main = mapM_ putStrLn (repeat "flood line")
