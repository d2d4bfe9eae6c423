"""The REST API adapter (`ultraplane serve`), installed as `ultraplane.api`, in rooms:

- `routers/`: one router per resource; HTTP in, a `Backend` call, HTTP out.
- `backends/`: the `Backend` the routers talk to (`backends/__init__.py`) and its two kinds:
  `embedded` (the core and the simulator's runtime in-process: `executors` carries out the
  core's decisions, `embeddedjobs` is a job's record, `fleets` the fleet, `demos` the demo
  stream, `dryruns` and `preemptionplans` the dry runs) and `kubernetes` (the custom
  resources are the state).
- `store/`: the SQL store (engine, migrations, CRUD in `store/__init__.py`), its tables
  (`tables`), accounting figures (`accounting`), the claim on its file (`claims`) and the
  Alembic migrations.
- `access/`: who is calling and what they may do; `guards/`: connection, body and rate limits.
- `client/`: the client CLI and kubectl plugin; `dashboard/`: the dashboard's static files.

At the top: the app factory (`app`), `serve` (`cli`), settings, the REST shapes (`schemas`,
`ultraserverpatches`), the error shape (`errors`, `problems`), OpenAPI and metrics.
"""
