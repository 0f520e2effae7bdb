import System.Exit
import System.IO

main :: IO ()
main = do
  hPutStrLn stderr "boom"
  exitWith (ExitFailure 3)
