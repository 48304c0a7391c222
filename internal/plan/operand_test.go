package plan

import "testing"

func TestOperandString(t *testing.T) {
	for _, tc := range []struct {
		op   Operand
		want string
	}{
		{Operand{Base: 0, Index: NoReg}, "*%rax"},
		{Operand{Base: 11, Index: NoReg}, "*%r11"},
		{Operand{Mem: true, Base: 3, Index: NoReg}, "*(%rbx)"},
		{Operand{Mem: true, Base: 0, Index: NoReg, Disp: 0x10}, "*0x10(%rax)"},
		{Operand{Mem: true, Base: 5, Index: NoReg, Disp: -8}, "*-0x8(%rbp)"},
		{Operand{Mem: true, Base: 0, Index: 3, Scale: 8, Disp: 0x18}, "*0x18(%rax,%rbx,8)"},
		{Operand{Mem: true, Base: NoReg, Index: 2, Scale: 8, Disp: 0x4020}, "*0x4020(,%rdx,8)"},
		{Operand{Mem: true, Base: RegRIP, Index: NoReg, Disp: 0x2f00}, "*0x2f00(%rip)"},
		{Operand{Mem: true, Base: NoReg, Index: NoReg, Disp: 0x601040}, "*0x601040"},
	} {
		if got := tc.op.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.op, got, tc.want)
		}
	}
}
