from rlark_scheduler.main import run

run()
