(throw (IllegalStateException. "boom"))
