"""What every importer shares: the converter mechanism and the channels-last conventions."""
