(loop [keep []] (recur (conj keep (byte-array (bit-shift-left 1 20) (byte 1)))))
