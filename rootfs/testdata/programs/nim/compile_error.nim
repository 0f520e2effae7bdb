let x: int = "a"
