from rlark_gateway.main import run

run()
