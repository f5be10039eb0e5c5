/* train_help.h: ./train --help: the usage line, the command-line-only switches, every training flag with its default
 * and the model keys of the config file, listed from config.c's option table, each with its value in the config used. */
#ifndef TRAIN_HELP_H
#define TRAIN_HELP_H

#include "model/config.h"

/* Prints the help to stdout with the values of cfg (whose path names its file; "" for the built-in defaults); prog
 * is argv[0]. */
void train_print_help(const char *prog, const Config *cfg);

#endif
