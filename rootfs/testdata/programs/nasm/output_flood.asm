        global _start
        section .data
msg:    db "flood line", 10
mlen:   equ $ - msg
        section .text
_start:
        mov rax, 1
        mov rdi, 1
        mov rsi, msg
        mov rdx, mlen
        syscall
        jmp _start
