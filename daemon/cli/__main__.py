from daemon.cli.main import main

main()
