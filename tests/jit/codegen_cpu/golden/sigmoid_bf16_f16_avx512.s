jmp L1
L0:
L3:
cmp rdx, 16
jl L4
L6:
vpmovzxwd zmm0, ymmword ptr [rdi]
vpslld zmm0, zmm0, 16
vorps zmm2, zmm0, [L7] {1to16}
vbroadcastss zmm3, dword ptr [L8]
vmaxps zmm2, zmm3, zmm2
vmulps zmm3, zmm2, [L9] {1to16}
vrndscaleps zmm3, zmm3, 8
vfnmadd231ps zmm2, zmm3, [L10] {1to16}
vbroadcastss zmm4, dword ptr [L11]
vfmadd213ps zmm4, zmm2, [L12] {1to16}
vfmadd213ps zmm4, zmm2, [L13] {1to16}
vfmadd213ps zmm4, zmm2, [L14] {1to16}
vfmadd213ps zmm4, zmm2, [L15] {1to16}
vfmadd213ps zmm4, zmm2, [L15] {1to16}
vscalefps zmm4, zmm4, zmm3
vaddps zmm2, zmm4, [L15] {1to16}
vrcp14ps zmm1, zmm2
vfnmadd213ps zmm2, zmm1, [L15] {1to16}
vfmadd231ps zmm1, zmm1, zmm2
vmulps zmm4, zmm4, zmm1
vcmpps k1, zmm0, [L16] {1to16}, 18
vblendmps zmm4 {k1}, zmm4, [L17] {1to16}
vpsrad zmm3, zmm0, 31
vpternlogd zmm1, zmm3, zmm4, 184
vmovaps zmm0, zmm1
vcmpps k1, zmm0, zmm0, 3
vblendmps zmm1 {k1}, zmm0, [L18] {1to16}
vpternlogd zmm1 {k1}, zmm0, [L7] {1to16}, 248
vcvtps2ph ymmword ptr [rsi], zmm1, 0
add rdi, 32
add rsi, 32
sub rdx, 16
cmp rdx, 16
jge L6
L4:
test rdx, rdx
jle L5
mov eax, -1
bzhi eax, eax, edx
kmovw k1, eax
vpmovzxwd zmm0 {k1}{z}, ymmword ptr [rdi]
vpslld zmm0, zmm0, 16
vorps zmm2, zmm0, [L7] {1to16}
vbroadcastss zmm3, dword ptr [L8]
vmaxps zmm2, zmm3, zmm2
vmulps zmm3, zmm2, [L9] {1to16}
vrndscaleps zmm3, zmm3, 8
vfnmadd231ps zmm2, zmm3, [L10] {1to16}
vbroadcastss zmm4, dword ptr [L11]
vfmadd213ps zmm4, zmm2, [L12] {1to16}
vfmadd213ps zmm4, zmm2, [L13] {1to16}
vfmadd213ps zmm4, zmm2, [L14] {1to16}
vfmadd213ps zmm4, zmm2, [L15] {1to16}
vfmadd213ps zmm4, zmm2, [L15] {1to16}
vscalefps zmm4, zmm4, zmm3
vaddps zmm2, zmm4, [L15] {1to16}
vrcp14ps zmm1, zmm2
vfnmadd213ps zmm2, zmm1, [L15] {1to16}
vfmadd231ps zmm1, zmm1, zmm2
vmulps zmm4, zmm4, zmm1
vcmpps k2, zmm0, [L16] {1to16}, 18
vblendmps zmm4 {k2}, zmm4, [L17] {1to16}
vpsrad zmm3, zmm0, 31
vpternlogd zmm1, zmm3, zmm4, 184
vmovaps zmm0, zmm1
vcmpps k2, zmm0, zmm0, 3
vblendmps zmm1 {k2}, zmm0, [L18] {1to16}
vpternlogd zmm1 {k2}, zmm0, [L7] {1to16}, 248
vcvtps2ph ymmword ptr [rsi] {k1}, zmm1, 0
L5:
L2:
vzeroupper
ret
L1:
jmp L0
align 64
align 4
L7:
.db 0x00, 0x00, 0x00, 0x80
align 4
L8:
.db 0x00, 0x00, 0xD1, 0xC2
align 4
L9:
.db 0x3B, 0xAA, 0xB8, 0x3F
align 4
L10:
.db 0x18, 0x72, 0x31, 0x3F
align 4
L11:
.db 0x2D, 0x31, 0x08, 0x3C
align 4
L12:
.db 0xF3, 0x94, 0x2B, 0x3D
align 4
L13:
.db 0xD7, 0xAB, 0x2A, 0x3E
align 4
L14:
.db 0xFE, 0xFE, 0xFF, 0x3E
align 4
L15:
.db 0x00, 0x00, 0x80, 0x3F
align 4
L16:
.db 0x18, 0x72, 0xB1, 0xC2
align 4
L17:
.db 0x00, 0x00, 0x00, 0x00
align 4
L18:
.db 0x00, 0x00, 0xC0, 0x7F
