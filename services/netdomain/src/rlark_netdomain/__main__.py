from rlark_netdomain.main import run

run()
