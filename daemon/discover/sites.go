package discover

import (
	"fmt"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
)

// AddSites numbers pl's sites after those already stored (pl.FirstSite)
// and stores them for the probe program; past MaxSites in all, the rest
// are dropped from pl. Their descriptors must be in place before their
// probes.
func (d *Discovery) AddSites(pl *plan.Plan) error {
	d.mu.Lock()
	first := len(d.sites)
	if first+len(pl.Sites) > MaxSites {
		pl.Sites = pl.Sites[:max(MaxSites-first, 0)]
	}
	for _, st := range pl.Sites {
		d.sites = append(d.sites, siteInfo{name: fmt.Sprintf("%s+%#x", st.Caller.Node.Name(), st.Addr-st.Caller.Node.Func.Addr),
			caller: st.Caller.ID, tail: st.Tail})
	}
	d.mu.Unlock()
	pl.FirstSite = uint32(first)
	descs := make([]bpf.Site, len(pl.Sites))
	for i, st := range pl.Sites {
		op := st.Operand
		fn := st.Caller.Node.Func
		lo := fn.Addr + st.Caller.Node.Obj.Bias
		descs[i] = bpf.Site{Mem: op.Mem, Base: regNum(op.Base), Index: regNum(op.Index), Scale: op.Scale, Disp: int32(op.Disp),
			Caller: st.Caller.ID, Lo: lo, Hi: lo + fn.Size}
		if op.Base == plan.RegRIP {
			descs[i].RIP = op.Next + st.Obj.Bias
		}
	}
	return d.env.Program.SetSites(first, descs)
}

// regNum returns the probe program's number of plan register r.
func regNum(r int) uint8 {
	switch r {
	case plan.NoReg:
		return wire.NoReg
	case plan.RegRIP:
		return wire.RegRIP
	}
	return uint8(r)
}
