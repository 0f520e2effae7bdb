(loop [n 0] (recur (inc n)))
