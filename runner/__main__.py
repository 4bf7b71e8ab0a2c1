from runner.cli.launch import main

main()
