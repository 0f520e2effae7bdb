: flood begin ." flood line" cr again ;
flood
