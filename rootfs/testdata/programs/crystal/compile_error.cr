x : Int32 = "a"
