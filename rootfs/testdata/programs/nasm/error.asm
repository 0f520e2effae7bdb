        global _start
        section .data
msg:    db "boom", 10
mlen:   equ $ - msg
        section .text
_start:
        mov rax, 1              ; write(2, msg, mlen)
        mov rdi, 2
        mov rsi, msg
        mov rdx, mlen
        syscall
        mov rax, 60             ; exit(3)
        mov rdi, 3
        syscall
