(let loop () (primitive-fork) (loop))
