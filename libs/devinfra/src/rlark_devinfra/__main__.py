from rlark_devinfra.cli import app

app(prog_name="python -m rlark_devinfra")
