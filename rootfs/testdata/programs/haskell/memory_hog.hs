import qualified Data.ByteString.Char8 as B

-- Each MiB (one byte more each time, so no two are shared) is kept; the
-- list is used where n wraps around, so the optimiser cannot drop it.
main :: IO ()
main = go 0 []
  where
    go :: Int -> [B.ByteString] -> IO ()
    go n acc
      | n < 0 = print (sum (map B.length acc))
      | otherwise = let b = B.replicate (1048576 + n) 'x' in B.length b `seq` go (n + 1) (b : acc)
