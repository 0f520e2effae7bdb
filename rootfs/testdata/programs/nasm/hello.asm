; reads one line from stdin, prints "hello, " and it
        global _start
        section .data
prefix: db "hello, "
plen:   equ $ - prefix
        section .bss
buf:    resb 256
        section .text
_start:
        mov rax, 0              ; read(0, buf, 256)
        mov rdi, 0
        mov rsi, buf
        mov rdx, 256
        syscall
        mov r12, rax            ; bytes read
        mov rax, 1              ; write(1, prefix, plen)
        mov rdi, 1
        mov rsi, prefix
        mov rdx, plen
        syscall
        mov rax, 1              ; write(1, buf, n)
        mov rdi, 1
        mov rsi, buf
        mov rdx, r12
        syscall
        mov rax, 60             ; exit(0)
        xor rdi, rdi
        syscall
