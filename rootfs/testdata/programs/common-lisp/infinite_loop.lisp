(loop for n from 0)
