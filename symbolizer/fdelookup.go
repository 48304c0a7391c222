package symbolizer

import "sort"

// CoveringFDE returns the FDE whose range holds the link-time address pc,
// or nil.
func (o *Object) CoveringFDE(pc uint64) *FDE {
	i := sort.Search(len(o.fdes), func(i int) bool { return o.fdes[i].PCBegin > pc }) - 1
	if i >= 0 && o.fdes[i].Contains(pc) {
		return &o.fdes[i]
	}
	return nil
}

// SlotRule says how to find the return-address slot of the frame of the
// function running at the link-time address pc, from the registers there:
// the slot is the stack pointer (or, when fromRBP, rbp) plus adjust. ok is
// false when the call frame information gives no such rule (no FDE, or a
// CFA computed by a DWARF expression).
func (o *Object) SlotRule(pc uint64) (adjust int64, fromRBP, ok bool) {
	fde := o.CoveringFDE(pc)
	if fde == nil {
		return 0, false, false
	}
	row, err := fde.RowAt(pc)
	if err != nil || row.CFA.Expr != nil {
		return 0, false, false
	}
	// The CFA is the stack pointer before the call; the return address
	// sits just below it.
	switch row.CFA.Reg {
	case RegRSP:
		return row.CFA.Offset - 8, false, true
	case RegRBP:
		return row.CFA.Offset - 8, true, true
	}
	return 0, false, false
}
