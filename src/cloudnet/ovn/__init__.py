"""OVN's own processes (NB/SB databases, northd, a chassis' ovs-vswitchd and ovn-controller), started from Debian's
packages with every socket, database, log and pidfile in one directory of cloudnet's state: the server's
`cloudnet up --dataplane ovn` and a chassis' agent start them; tests start a sandbox of their own."""
