package lockserver

import "github.com/sharedcontent/sharedcontent/lockserver/api"

// WrongCluster is the refusal of a request for cluster asked by coordinator
// c of another cluster: it matches api.ErrWrongCluster and says how to
// recover.
func WrongCluster(asked string, c api.Cluster) error { return wrongCluster(asked, c) }
