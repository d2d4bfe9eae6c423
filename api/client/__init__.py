"""The client CLI and kubectl plugin: `ultraplane get|describe|apply|delete|top|why|accounting`.

Why a client beside the server: without one, every action was a hand-written curl with a
hand-written JSON body. The same commands are installed as `kubectl-ultraplane`, so
`kubectl ultraplane why my-job` works, and they talk either to the REST API (`--server`) or
straight to a cluster through kubeconfig (the kubectl plugin's default).
"""
