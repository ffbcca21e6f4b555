from rlark_cli.main import app

app(prog_name="rlark")
