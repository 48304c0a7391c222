package x86

import (
	"strings"
	"testing"
)

// TestSafetyTableClasses checks that the model says of every row of
// SafetyTable what the table says, and that each row is one whole
// instruction with a measurement. (safety_integration_test.go measures
// the rows with real uprobes.)
func TestSafetyTableClasses(t *testing.T) {
	seen := map[string]bool{}
	for _, row := range SafetyTable {
		if seen[row.Name] {
			t.Errorf("row %s: listed twice", row.Name)
		}
		seen[row.Name] = true
		in, err := Decode(row.Code, 0x1000)
		if err != nil {
			t.Errorf("row %s: decoding % x: %v", row.Name, row.Code, err)
			continue
		}
		if in.Len != len(row.Code) {
			t.Errorf("row %s: % x decodes as %d bytes, want one instruction of %d", row.Name, row.Code, in.Len, len(row.Code))
		}
		if c := ProbeClass(&in); c != row.Class {
			t.Errorf("row %s: ProbeClass(% x) = %s, the table says %s", row.Name, row.Code, c, row.Class)
		}
		if h := Hazard(&in); (h != "") != (row.Class == ClassUnprobeable) {
			t.Errorf("row %s: Hazard = %q, class %s", row.Name, h, row.Class)
		}
		if row.Measured == "" {
			t.Errorf("row %s: no measurement", row.Name)
		}
		if row.RunsCorrectly && row.Class != ClassUnprobeable {
			t.Errorf("row %s: RunsCorrectly is for unprobeable rows", row.Name)
		}
	}
}

func TestEncoding(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  []byte
		enc  Encoding
	}{
		{"push rbp", []byte{0x55}, EncLegacy},
		{"movd %esi,%xmm2", []byte{0x66, 0x0f, 0x6e, 0xd6}, EncLegacy},
		{"mov %fs:0x28,%rax", []byte{0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0x00, 0x00, 0x00}, EncLegacy},
		{"pop (%rax)", []byte{0x8f, 0x00}, EncLegacy},
		{"vzeroupper", []byte{0xc5, 0xf8, 0x77}, EncVEX},
		{"shlx", []byte{0xc4, 0xe2, 0xc1, 0xf7, 0xc6}, EncVEX},
		{"data16 VEX (invalid, still VEX)", []byte{0x66, 0xc5, 0xf9, 0x6e, 0xce}, EncVEX},
		{"vpbroadcastb %esi,%zmm0", []byte{0x62, 0xf2, 0x7d, 0x48, 0x7a, 0xc6}, EncEVEX},
		{"vprotb $1,%xmm0,%xmm1 (XOP)", []byte{0x8f, 0xe8, 0x78, 0xc0, 0xc8, 0x01}, EncXOP},
		{"REX2 mov", []byte{0xd5, 0x10, 0x89, 0xc0}, EncREX2},
	} {
		in := Inst{Raw: tc.raw}
		if got := in.Encoding(); got != tc.enc {
			t.Errorf("%s (% x): encoding %s, want %s", tc.name, tc.raw, got, tc.enc)
		}
		if tc.enc != EncLegacy && !strings.HasPrefix(Hazard(&in), tc.enc.String()) {
			t.Errorf("%s (% x): Hazard %q, want a %s hazard", tc.name, tc.raw, Hazard(&in), tc.enc)
		}
	}
}
