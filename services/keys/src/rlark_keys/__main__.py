from rlark_keys.main import run

run()
