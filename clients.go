package weir

import (
	"context"

	"github.com/weirq/weir/weirtype"
)

// ClientRow is a running client as the client registry records it.
type ClientRow = weirtype.ClientRow

// ClientQueue is a queue a registered client works, with its worker limit.
type ClientQueue = weirtype.ClientQueue

// ClientList lists the running clients of the schema, by id: each started
// client writes its row at Start, refreshes it every 5 s and deletes it at
// the end of Stop, and the maintenance leader deletes the rows left
// unrefreshed for a minute (a crashed client's). A client that only inserts
// (no Start) is not listed. Each row counts the running jobs whose latest
// attempt is the client's (HeldLeases), and says whether the client leads
// maintenance now.
//
// The registry is informational: nothing that delivers jobs reads it, so a
// client missing from it (its writes failed) runs its jobs as before.
func (c *Client) ClientList(ctx context.Context) ([]*ClientRow, error) {
	var rows []*ClientRow
	err := c.operate(ctx, func() error {
		exec := c.driver.Executor()
		var err error
		if rows, err = exec.ClientList(ctx); err != nil {
			return err
		}
		leader, err := c.leader(ctx, exec)
		if err != nil || leader == nil {
			return err
		}
		for _, r := range rows {
			r.Leader = r.ID == leader.ID
		}
		return nil
	})
	if err != nil {
		return nil, opErr(err)
	}
	return rows, nil
}
